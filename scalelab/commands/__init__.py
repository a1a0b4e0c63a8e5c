"""The ``scalelab`` command's verbs (``scalelab.commands``), run in the operator's terminal.

One module per verb, or per part of one: :mod:`~scalelab.commands.up` with its configuration,
state folder, file names, file modes and identity; :mod:`~scalelab.commands.doctor`;
:mod:`~scalelab.commands.config_reference`. :mod:`scalelab.cli` parses the command line and
imports a verb's module only when it runs.
"""
