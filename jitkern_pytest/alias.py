"""The entry point ``jitkern``: makes ``-p jitkern`` load the plugin ``jitkern_pytest``.

pytest registers each entry point's module under the entry point's name and refuses one
module under two names, so this name gets its own module, which holds no fixtures and
only asks for the plugin by its registered name (once, however many ways it is named).
"""

pytest_plugins = ["jitkern_pytest"]
