"""Building a deployment's binaries for a named target, on any machine.

- ``compile``: compile tasks, in this process or a pool of workers.
- ``host_modules``: the host C modules a binary's load needs, built at warmup.
- ``probe``: where a key's files are in the cache, found without compiling; its lock.
- ``check``: checking a warmed cache (``--check``), compiling nothing.
- ``report``: what a warmup run reports, as a table and as JSON.
"""
