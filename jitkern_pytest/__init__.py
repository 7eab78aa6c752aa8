"""The pytest plugin ``jitkern_pytest`` (also loaded as ``-p jitkern``): the fixture ``assert_no_compile``.

A package of its own, outside ``jitkern``, so that loading it imports neither jitkern nor
Triton: pytest loads plugins before ``conftest.py``, and Triton must not be imported
before a conftest sets ``TRITON_INTERPRET`` (its library functions are built for one mode).
"""

import pytest


@pytest.fixture(name="assert_no_compile")
def _assert_no_compile_fixture():
    """Run the test body inside ``jitkern.testing.assert_no_compile()``."""
    from jitkern.testing import assert_no_compile

    with assert_no_compile() as problems:
        yield problems
