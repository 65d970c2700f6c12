"""Model families: one module per architecture (:mod:`.architectures`: its blocks' traits, a tiny
random model, the seed papers' checkpoints, where HF keeps its layers), the registry that lists
them (:mod:`.registry`), and the support matrix of families x sites and analyses (:mod:`.support`)."""

from .registry import (
    FAMILIES,
    FAMILY_MODULES,
    Family,
    UnknownFamilyError,
    family_of,
    family_of_config,
    get_family,
    layer_paths,
)
from .support import (
    SITE_COLUMNS,
    Support,
    UnsupportedError,
    check_support,
    columns,
    markdown_table,
    register_support,
    support,
    support_rule,
    support_table,
)

__all__ = [
    "FAMILIES",
    "FAMILY_MODULES",
    "Family",
    "UnknownFamilyError",
    "family_of",
    "family_of_config",
    "get_family",
    "layer_paths",
    "SITE_COLUMNS",
    "Support",
    "UnsupportedError",
    "check_support",
    "markdown_table",
    "support",
    "support_table",
    "columns",
    "register_support",
    "support_rule",
]
