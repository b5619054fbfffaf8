"""Glue between neardup and the tools its users already run (crawlers, web archives)."""
