r"""The runner: what every analysis runs through, apart from what it computes.

* :mod:`.analysis`: the contract (``Config``, ``Result`` and its ``Table``\ s, ``Analysis`` and
  ``register_analysis``, ``Command``, the atlas chapters and steps);
* :mod:`.results`: the one way tables reach the disk (``ResultLog``, ``merge_csv``), the identity
  columns and the run state of a command;
* :mod:`.identity`: a model's ``RunIdentity`` and ``identified``, the decorator of every ``run``;
* :mod:`.provenance`: ``provenance.jsonl``, one line per finished command;
* :mod:`.cliargs`: flags from configs, ``LoadConfig``, output folders;
* :mod:`.distributed`: ``run_analysis`` (work units over torchrun ranks, saved once) and
  ``run_command`` (what every analysis command does before it prints).

``analysis``, ``results``, ``provenance`` and ``cliargs`` load without torch or model code
(``tests/test_layering.py``); ``identity`` and ``distributed`` read models.
"""
