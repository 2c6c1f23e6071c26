"""Render a machine spec (DOT, SVG, PNG, Mermaid) with a live state or a run's trace."""

__all__: list[str] = []
