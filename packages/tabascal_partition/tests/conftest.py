"""Shared test setup: the hypothesis profile (see below)."""

import os

import hypothesis

# Property tests draw the same examples on every run unless HYPOTHESIS_PROFILE says otherwise,
# so that a CI failure reproduces anywhere with the same command; "explore" draws fresh ones.
hypothesis.settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis.settings.register_profile("explore", derandomize=False, print_blob=True)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
hypothesis.settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_report_header(config):
    current = hypothesis.settings()
    return (
        f"hypothesis profile {HYPOTHESIS_PROFILE!r}: derandomize={current.derandomize}, "
        f"max_examples={current.max_examples} (HYPOTHESIS_PROFILE=explore for fresh examples)"
    )
