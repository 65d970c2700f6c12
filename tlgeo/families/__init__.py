"""Model families: what each architecture's blocks look like (:mod:`.registry`), a tiny random
model of each, and the support matrix of families x sites and analyses (:mod:`.support`)."""

from .registry import ALIASES, FAMILIES, Family, UnknownFamilyError, family_of, family_of_config, get_family
from .support import (ANALYSIS_COLUMNS, COLUMNS, SITE_COLUMNS, Support, UnsupportedError, check_support, columns,
                      markdown_table, register_support, support, support_table)

__all__ = ["ALIASES", "FAMILIES", "Family", "UnknownFamilyError", "family_of", "family_of_config", "get_family",
           "ANALYSIS_COLUMNS", "COLUMNS", "SITE_COLUMNS", "Support", "UnsupportedError", "check_support",
           "markdown_table", "support", "support_table", "columns", "register_support"]
