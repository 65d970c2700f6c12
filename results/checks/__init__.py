"""RESULTS.md's claims, one module per section of RESULTS.md (``s1_decomposition`` .. ``s7_circuits``), each beside
the tables it checks; ``common`` holds the registry and the tables' paths. ``results/claims.py`` imports them all
and runs them."""
