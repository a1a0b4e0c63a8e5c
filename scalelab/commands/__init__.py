"""The ``scalelab`` command's verbs (``scalelab.commands``), run in the operator's terminal.

- :mod:`~scalelab.commands.up` -- ``scalelab up``: a course hub on one machine;
- :mod:`~scalelab.commands.up_config` -- its embedded hub configuration (pure);
- :mod:`~scalelab.commands.upstate` -- its state folder, and hubs an earlier run left;
- :mod:`~scalelab.commands.state_files` -- the names of the files in that folder;
- :mod:`~scalelab.commands.state_modes` -- their modes: the hub's secrets its own (0600);
- :mod:`~scalelab.commands.identity` -- who the servers run as: a system user per student, or
  one shared identity (a single-user trial);
- :mod:`~scalelab.commands.doctor` -- ``scalelab doctor``;
- :mod:`~scalelab.commands.config_reference` -- ``scalelab config-reference``.

:mod:`scalelab.cli` parses the command line and imports a verb's module only when it runs.
"""
