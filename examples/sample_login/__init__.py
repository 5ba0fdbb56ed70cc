"""A stand-in for a Brand's own login: signs the §5.3 hand-off assertion (see the README)."""

from examples.sample_login.login import create_login_app

__all__ = ["create_login_app"]
