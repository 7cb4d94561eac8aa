"""Settings for the whole suite."""

from hypothesis import settings

# Speed is measured in the benchmarks, not asserted in tests: Hypothesis's per-example deadline
# (200 ms by default) fails property tests when the machine is busy, whatever the code does.
settings.register_profile("railyard", deadline=None)
settings.load_profile("railyard")
