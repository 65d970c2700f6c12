"""One module per model family, each declaring its :class:`~tlgeo.families.family.Family` as
``FAMILY``; :mod:`tlgeo.families.registry` lists them."""
