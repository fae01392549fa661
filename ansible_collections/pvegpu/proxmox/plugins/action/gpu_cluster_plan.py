# -*- coding: utf-8 -*-
"""A spec given as a path is read on the controller, as for gpu_split."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.pvegpu.proxmox.plugins.action.gpu_split import ActionModule as _SpecReader


class ActionModule(_SpecReader):
    pass
