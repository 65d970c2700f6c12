"""The report layer: ``tlgeo atlas`` (one model → one HTML report + CSVs).

* :mod:`.html`: :class:`~.html.Report`, a self-contained HTML page (tables,
  matplotlib figures, circuitsvis views, all inlined).
* :mod:`.atlas`: :class:`~.atlas.AtlasConfig` and :func:`~.atlas.run_atlas`,
  which run the registered steps.
* :mod:`.registry`: the analysis packages that contribute steps.

Nothing below this layer imports it.
"""

from .html import Report

__all__ = ["Report"]
