"""``memhook report``: jsonl traces drawn as one self-contained HTML page.

* :mod:`memhook.report.model` - the figures, read from the traces as they
  stream by, in memory bounded by the program's shape, not the trace's length;
* :mod:`memhook.report.page` - the page: the figures as JSON, with the
  charting library and the page's script inlined from ``assets/``.

The command's front end is :mod:`memhook.cli.report`.
"""

__all__: list[str] = []
