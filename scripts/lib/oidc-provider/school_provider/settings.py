"""Settings of the tests' OpenID provider: django-oidc-provider in a small
Django project, its state (SQLite) in the folder run.sh is given, served
over HTTPS on 127.0.0.1 by gunicorn. Not for production: a fixed, public
secret key and test accounts."""
import os

STATE = os.environ["HALLPASS_OIDC_STATE"]
PORT = int(os.environ["HALLPASS_OIDC_PORT"])

# Sessions and CSRF tokens of a provider that lives for one test.
SECRET_KEY = "hallpass-test-provider-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oidc_provider",
    "school_provider",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "school_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(STATE, "provider.sqlite3")}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
USE_TZ = True
LOGIN_URL = "/accounts/login/"
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# The same passwords for every test: the fastest hasher (not for production).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The issuer: https://127.0.0.1:PORT/openid
SITE_URL = f"https://127.0.0.1:{PORT}"
# Name, e-mail and the `groups` claim in the ID token itself (as Entra ID and
# Keycloak can), not only at the userinfo endpoint.
OIDC_IDTOKEN_INCLUDE_CLAIMS = True
OIDC_USERINFO = "school_provider.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "school_provider.claims.GroupsClaims"

LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
