"""Finding profiles: shipped ones by name (sysctl_profiles/profiles/NAME.conf) or any file by path."""

from __future__ import annotations

from pathlib import Path

from sysctl_profiles.errors import ProfileError
from sysctl_profiles.profile import Profile, parse_profile

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
SUFFIX = ".conf"


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob(f"*{SUFFIX}"))


def profile_path(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    if "/" in text or text.endswith(SUFFIX):
        return Path(text)
    path = PROFILES_DIR / f"{text}{SUFFIX}"
    if not path.exists():
        raise ProfileError(f"no profile named {text!r}; shipped: {', '.join(profile_names())} (or give a path)")
    return path


def load_profile(name_or_path: str | Path) -> Profile:
    """Parse a shipped profile by name, or a profile file by path (anything with '/' or ending in .conf)."""
    path = profile_path(name_or_path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ProfileError(f"cannot read profile {path}: {e.strerror}") from None
    name = path.stem
    return parse_profile(text, name, str(path))
