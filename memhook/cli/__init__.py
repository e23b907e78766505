"""The ``memhook`` command's larger subcommands.

* :mod:`memhook.cli.trace` - ``memhook trace``: run a command with the hooks
  preloaded and collect every process's events (:mod:`.collector`,
  :mod:`.protocol`), account for them (:mod:`.ledger`) and write them
  (:mod:`.formats`);
* :mod:`memhook.cli.info` - ``memhook info``: what a bug report needs;
* :mod:`memhook.cli.demo` - ``memhook demo``: :mod:`.demo_workload` under trace.
"""
