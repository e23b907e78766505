"""The machinery behind ``memhook trace`` (whose front end, the command
line, is :mod:`memhook.cli.trace`), bottom up:

* :mod:`.protocol` - the messages a traced process sends (mirrors
  ``csrc/trace/trace_proto.h``); :mod:`.peers` - who sent them, by the
  kernel's word; :mod:`.sockdir` - the socket's folder, and the removal
  of those killed traces left behind;
  :mod:`.escape` - whether CMD will run without the core;
* :mod:`.area` - reading a traced process's trace area (its memfd);
  :mod:`.pyframes` - naming the Python frames recorded there;
  :mod:`.modules` - which object was loaded where, for callers;
  :mod:`.bindings` - the binding layers between Python and CUDA;
  :mod:`.sites` - who called, as the outputs name it (the Python caller
  through a binding, the program's call site, the way down to CUDA);
* :mod:`.oom` - the OOM report: what was live on a device when an
  allocation there failed for lack of memory;
* :mod:`.ledger` - the summary's figures, bounded by what is live (it
  builds the OOM report when it accounts for the failure);
* :mod:`.reorder` - all processes' events merged into timestamp order;
* :mod:`.writers` - the output formats, one module each;
* :mod:`.collector` - the loop that ties them together;
* :mod:`.runinfo` - who wrote a trace (host, rank, ``-o``'s template) and
  its clock's anchor, the jsonl header;
* traces read back: :mod:`.tracefile` (a jsonl trace, line by line),
  :mod:`.progress`, :mod:`.diff` (``memhook diff``), :mod:`.merge` and
  :mod:`.merge_writers` (``memhook merge``).
"""
