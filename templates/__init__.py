"""Jinja2 templates of every rendered artifact, installed as pvegpu.templates."""
