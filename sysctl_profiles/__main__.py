"""`python -m sysctl_profiles`."""

from sysctl_profiles.cli import main

main()
