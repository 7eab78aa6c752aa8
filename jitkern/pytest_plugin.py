"""The pytest plugin (entry point ``jitkern``): the fixture ``assert_no_compile``.

It imports nothing of Triton at load time: pytest loads plugins before ``conftest.py``,
and Triton must not be imported before a conftest sets ``TRITON_INTERPRET``.
"""

import pytest


@pytest.fixture(name="assert_no_compile")
def _assert_no_compile_fixture():
    """Run the test body inside ``jitkern.testing.assert_no_compile()``."""
    from jitkern.testing import assert_no_compile

    with assert_no_compile() as problems:
        yield problems
