"""Settings for the RTVI dashboard.

One file, driven by environment variables. With none set it runs the embedded
default: SQLite, the in-memory channel layer, the local-memory cache and the
built-in agents API. Every variable is documented where it is read and listed
in the README.
"""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from rtvi_dashboard.wire import MAX_FRAME_BYTES  # the bot package's default: one value on both sides

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: str) -> bool:
    value = os.getenv(name, default).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {value!r}")


def envint(name: str, default: str) -> int:
    try:
        return int(os.getenv(name, default))
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number") from None


def envfloat(name: str, default: str) -> float:
    try:
        return float(os.getenv(name, default))
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number") from None


def envlist(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.getenv(name, default).split(",") if item.strip()]


# DEBUG: development mode. On by default so that a fresh checkout runs; any
# real deployment sets DEBUG=false, which turns on the HTTPS settings below.
DEBUG = envbool("DEBUG", "true")

# SECRET_KEY: signs sessions and CSRF tokens. Required when DEBUG is off.
_DEV_SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"
SECRET_KEY = os.getenv("SECRET_KEY", _DEV_SECRET_KEY)
if not DEBUG and SECRET_KEY == _DEV_SECRET_KEY:
    raise ImproperlyConfigured("Set SECRET_KEY to a long random value when DEBUG is off.")

# ALLOWED_HOSTS: comma-separated host names this server answers for. Browser
# WebSockets must come from one of them (Origin check).
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]" if DEBUG else "")

# CSRF_TRUSTED_ORIGINS: comma-separated origins (scheme://host) for HTTPS
# deployments behind a proxy; empty by default.
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")
# A failed CSRF check under /v1/ or /api/ answers JSON ({"error": ...}, 403)
# saying what was missing, like every other answer there; elsewhere it is
# Django's own page.
CSRF_FAILURE_VIEW = "dashboard.web.errors.csrf_failure"

INSTALLED_APPS = [
    "daphne",
    "dashboard.apps.SiteAdminConfig",  # django.contrib.admin, its site asking dashboard/access/policy.py
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "dashboard",
    "rtvi_monitor",
]

MIDDLEWARE = [
    "dashboard.web.middleware.ServerTimingMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "dashboard.web.errors.MachineErrorsMiddleware",
    # Last on purpose: a body over DATA_UPLOAD_MAX_MEMORY_SIZE (Django's 2.5 MB)
    # is a 413 in JSON before any view or CSRF check runs, and too many form
    # fields or files a 400 in JSON. Django calls process_exception from the
    # last middleware up, so listed here it answers before MachineErrorsMiddleware,
    # which would make them a 500 (dashboard/web/middleware.py).
    "dashboard.web.middleware.RequestLimitsMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
ASGI_APPLICATION = "dashboard.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.access.auth.membership_context",
            ],
        },
    },
]

# DATABASE_URL: e.g. postgres://user@127.0.0.1:5432/dashboard. Unset: SQLite
# in db.sqlite3 beside manage.py (SQLITE_PATH overrides the file).
DATABASE_URL = os.getenv("DATABASE_URL", "")
if DATABASE_URL:
    import dj_database_url

    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.getenv("SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
            # WAL lets the live server write while pages read; a generous
            # timeout rides out the writer's short transactions. secure_delete:
            # what is deleted (an erased call's words) is overwritten with zeros,
            # not left in free pages (rtvi_monitor/privacy/contents.py settles the WAL).
            "OPTIONS": {
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA secure_delete=ON;",
                "transaction_mode": "IMMEDIATE",
            },
            "TEST": {"NAME": os.getenv("SQLITE_TEST_PATH", str(BASE_DIR / "test-db.sqlite3"))},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# REDIS_URL: e.g. redis://127.0.0.1:6379/0. Set: the channel layer and the
# cache live in Redis, shared by every server process. Unset: in-process.
REDIS_URL = os.getenv("REDIS_URL", "")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "rtvi-dashboard",
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    # One process: relays go from the writer to the browsers directly
    # (rtvi_monitor/live/relay.py, Fanout); nothing is sent through this layer.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.getenv("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# STATIC_ROOT: where `manage.py collectstatic` puts files for the reverse proxy.
STATIC_ROOT = Path(os.getenv("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# SERVE_STATIC: let the ASGI app serve /static/ itself (on with DEBUG; in
# production the reverse proxy serves STATIC_ROOT).
SERVE_STATIC = envbool("SERVE_STATIC", "true" if DEBUG else "false")
# DAPHNE_TUNING: daphne's connections send a frame at once when nothing is queued before it, instead
# of at the loop's next turn, and small frames are unmasked in one step (dashboard/server/daphne_tuning.py);
# false leaves twisted and autobahn as they come.
DAPHNE_TUNING = envbool("DAPHNE_TUNING", "true")

# Call audio (rtvi_monitor/audio/store.py), stored through Django's storage API under the alias "audio". By
# default on this machine's disk, in AUDIO_ROOT; with AUDIO_S3_BUCKET set, in S3 or any S3-compatible
# store (django-storages' S3Storage, boto3): AUDIO_S3_ENDPOINT_URL for MinIO, Ceph, R2...;
# credentials from AUDIO_S3_ACCESS_KEY_ID / AUDIO_S3_SECRET_ACCESS_KEY, else boto3's own (AWS_* variables,
# an instance role). Recordings are never public: they are served only through the dashboard, which
# checks the listener's role and writes the audit log.
# S3's calls stay boto3's (signing, multipart, its own retries): they go to the deployment's own store, never to
# an address a user gave, so the outbound client's guard has nothing to add; they get explicit timeouts and
# bounded retries here instead of botocore's 60 s and legacy mode (AUDIO_S3_TIMEOUT seconds to connect and per
# read, AUDIO_S3_ATTEMPTS in all).
AUDIO_ROOT = Path(os.getenv("AUDIO_ROOT", str(BASE_DIR / "var" / "audio")))
if os.getenv("AUDIO_S3_BUCKET"):
    from botocore.config import Config as _S3Config

    _s3_timeout = envfloat("AUDIO_S3_TIMEOUT", "10")
    AUDIO_STORAGE = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": os.environ["AUDIO_S3_BUCKET"],
            "endpoint_url": os.getenv("AUDIO_S3_ENDPOINT_URL") or None,
            "region_name": os.getenv("AUDIO_S3_REGION") or None,
            "access_key": os.getenv("AUDIO_S3_ACCESS_KEY_ID") or None,
            "secret_key": os.getenv("AUDIO_S3_SECRET_ACCESS_KEY") or None,
            "location": os.getenv("AUDIO_S3_PREFIX", "audio"),
            "default_acl": None,
            "querystring_auth": True,
            "file_overwrite": False,
            "client_config": _S3Config(
                connect_timeout=_s3_timeout,
                read_timeout=_s3_timeout,
                retries={"mode": "standard", "max_attempts": envint("AUDIO_S3_ATTEMPTS", "3")},
                s3={"addressing_style": None},
            ),
        },
    }
else:
    AUDIO_STORAGE = {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": AUDIO_ROOT}}
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "audio": AUDIO_STORAGE,
}
# AUDIO_MAX_CHUNK_BYTES: the largest chunk a bot may PUT (4 MiB: over two minutes at 16 kHz).
AUDIO_MAX_CHUNK_BYTES = envint("AUDIO_MAX_CHUNK_BYTES", str(4 * 1024 * 1024))
# AUDIO_MAX_PENDING: chunks a process holds waiting to be stored; past it a PUT is answered 503 with
# Retry-After at once (the bot package keeps the chunk and sends it again), not queued without end.
AUDIO_MAX_PENDING = envint("AUDIO_MAX_PENDING", "64")
# AUDIO_VAD_AGGRESSIVENESS: webrtcvad's 0 (hears most as speech) to 3 (least).
AUDIO_VAD_AGGRESSIVENESS = envint("AUDIO_VAD_AGGRESSIVENESS", "2")
# AUDIO_DEAD_AIR_SECONDS: a silence of both sides at least this long is dead air.
AUDIO_DEAD_AIR_SECONDS = envfloat("AUDIO_DEAD_AIR_SECONDS", "3.0")
# AUDIO_RANGE_MAX_BYTES: the most one range request of the call's WAV answers (8 MiB: 65 s of 16 kHz stereo);
# a player asks for the rest as it plays.
AUDIO_RANGE_MAX_BYTES = envint("AUDIO_RANGE_MAX_BYTES", str(8 * 1024 * 1024))
# AUDIO_LISTEN_AUDIT_SECONDS: a listener's plays of one call are one audit entry per this long.
AUDIO_LISTEN_AUDIT_SECONDS = envint("AUDIO_LISTEN_AUDIT_SECONDS", "3600")

# HTTPS hardening, on whenever DEBUG is off. SECURE_SSL_REDIRECT=false suits a
# proxy that already redirects; SECURE_PROXY_SSL_HEADER trusts its header.
if not DEBUG:
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", "true")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", "31536000")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", "true")
    SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", "true")
    if envbool("USE_X_FORWARDED_PROTO", "false"):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
# SESSION_MAX_AGE: seconds a browser login lasts (default 12 hours: a shift), renewed by nothing.
SESSION_COOKIE_AGE = envint("SESSION_MAX_AGE", str(12 * 3600))
# LOGIN_MAX_FAILURES (per username) and LOGIN_MAX_FAILURES_PER_IP failed sign-ins within
# LOGIN_LOCKOUT_SECONDS lock further attempts out for that long (dashboard/access/login.py).
LOGIN_MAX_FAILURES = envint("LOGIN_MAX_FAILURES", "5")
LOGIN_MAX_FAILURES_PER_IP = envint("LOGIN_MAX_FAILURES_PER_IP", "20")
LOGIN_LOCKOUT_SECONDS = envint("LOGIN_LOCKOUT_SECONDS", "900")
X_FRAME_OPTIONS = "DENY"

# --- Outbound HTTP (dashboard/net/outbound.py: every call to another server) -------------------
# OUTBOUND_ALLOWED_HOSTS: hosts a call may reach although they are, or resolve to, a private,
# loopback, link-local, multicast or reserved address (refused otherwise: dashboard/net/guard.py).
# Comma-separated: names (agents.internal), domains with every name under them (.corp.example),
# addresses or networks (10.0.0.0/8: names resolving inside it), or * (no check). Hosts the
# operator's own settings name are allowed for their own calls without it: AGENTS_API_BASE_URL's
# (the built-in agents API on this server by default), OIDC_ISSUER's, PagerDuty's and Opsgenie's.
OUTBOUND_ALLOWED_HOSTS = envlist("OUTBOUND_ALLOWED_HOSTS", "")

# --- Agents API (dashboard/agents/service.py) -------------------------------------
# AGENTS_API_BASE_URL: base of the agents API, up to and including /v1.
# Pipecat Cloud: https://api.pipecat.daily.co/v1. Default: this dashboard's
# own built-in API at HOST:PORT. An organization may override it in the admin.
AGENTS_API_BASE_URL = os.getenv(
    "AGENTS_API_BASE_URL",
    f"http://{os.getenv('HOST', '127.0.0.1')}:{os.getenv('PORT', '8000')}/v1",
).rstrip("/")
# AGENTS_API_KEY: private key sent as a bearer token. An organization's own
# key (set in the admin, or by seed_demo) takes precedence.
AGENTS_API_KEY = os.getenv("AGENTS_API_KEY", "")
# AGENTS_CACHE_TTL: seconds a fetched agent list is served from the cache as
# is; an older one is still served while a background fetch replaces it.
AGENTS_CACHE_TTL = envint("AGENTS_CACHE_TTL", "60")
# AGENTS_CONNECT_TIMEOUT / AGENTS_READ_TIMEOUT: seconds for each HTTP call.
AGENTS_CONNECT_TIMEOUT = envfloat("AGENTS_CONNECT_TIMEOUT", "3")
AGENTS_READ_TIMEOUT = envfloat("AGENTS_READ_TIMEOUT", "5")
# AGENTS_RETRIES: extra attempts on connection errors and 5xx answers, with
# exponential backoff starting at AGENTS_RETRY_BACKOFF seconds.
AGENTS_RETRIES = envint("AGENTS_RETRIES", "2")
AGENTS_RETRY_BACKOFF = envfloat("AGENTS_RETRY_BACKOFF", "0.25")
# AGENTS_DEADLINE: seconds one fetch may take in all, retries and the whole
# body included (the read timeout is per read: a trickling upstream beats it).
AGENTS_DEADLINE = envfloat("AGENTS_DEADLINE", "8")
# AGENTS_PAGE_WAIT: seconds a page waits for the upstream; past that it shows
# the last good list (or says the list is coming) and the fetch goes on in the
# background to fill the cache.
AGENTS_PAGE_WAIT = envfloat("AGENTS_PAGE_WAIT", "2")
# AGENTS_FAILURE_BACKOFF: seconds after a failed fetch during which loads do
# not ask the upstream again and show the last good list with the failure
# (the Refresh button still asks).
AGENTS_FAILURE_BACKOFF = envfloat("AGENTS_FAILURE_BACKOFF", "15")
# PLATFORM_CACHE_TTL: seconds an agent's status, a page of its sessions or of
# its logs (dashboard/agents/pipecat_cloud.py: the rest of the agents API) is served from
# the cache as is; the failure back-off and page wait above apply to them too.
PLATFORM_CACHE_TTL = envint("PLATFORM_CACHE_TTL", "10")
# PLATFORM_ENDED_SESSION_TTL: the same for an ended session's record, which
# hardly changes any more (an active or unknown one: PLATFORM_CACHE_TTL).
PLATFORM_ENDED_SESSION_TTL = envint("PLATFORM_ENDED_SESSION_TTL", "300")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.getenv("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

# --- Live sessions (rtvi_monitor/) -----------------------------------------
# INGEST_MAX_FRAME_BYTES: a bot frame larger than this (in UTF-8 bytes) closes
# its socket with 4009 after an {"error", "fatal"} frame.
INGEST_MAX_FRAME_BYTES = envint("INGEST_MAX_FRAME_BYTES", str(MAX_FRAME_BYTES))
# REDACTION_BUILTIN: remove e-mail addresses, phone numbers, payment cards (Luhn), IBANs and US SSNs
# from every text a bot sends, before it is stored (rtvi_monitor/core/redaction.py). On unless set to false;
# organizations add their own patterns in the admin (Redaction rules).
REDACTION_BUILTIN = envbool("REDACTION_BUILTIN", "true")
# REDACTION_HOLD_SECONDS: how long a streamed piece of text (an LLM's token, a TTS word, a transcription's
# final) whose end could still be the start of a card or phone number waits for its stream's next piece,
# so the number is found joined (rtvi_monitor/live/joining.py). Tokens come tens of milliseconds apart; a
# TTS service's words and a caller's finals as they are said, a group of four digits about a second apart.
# Only that stream waits; the wait is its ack's delay, for pieces ending in digits only.
REDACTION_HOLD_SECONDS = envfloat("REDACTION_HOLD_SECONDS", "3.0")
# INGEST_RATE_LIMIT: RTVI messages per second one bot connection may sustain;
# bursts of INGEST_RATE_BURST_SECONDS worth are allowed. Over it: close (4429).
INGEST_RATE_LIMIT = envfloat("INGEST_RATE_LIMIT", "1000")
INGEST_RATE_BURST_SECONDS = envfloat("INGEST_RATE_BURST_SECONDS", "5")
# INGEST_RATE_BYTES: bytes per second one bot connection may sustain (same
# burst): the work a message costs grows with its size, so counting messages
# alone would let one bot of huge messages slow every other. Over it: close (4429).
INGEST_RATE_BYTES = envint("INGEST_RATE_BYTES", str(2 * 1024 * 1024))
# INGEST_FLUSH_INTERVAL: seconds between batched writes (and so between relays
# to browsers, which follow the write). INGEST_FLUSH_ROWS flushes sooner.
INGEST_FLUSH_INTERVAL = envfloat("INGEST_FLUSH_INTERVAL", "0.05")
INGEST_FLUSH_ROWS = envint("INGEST_FLUSH_ROWS", "1000")
# INGEST_GROUP_COMMIT: store rows as soon as the previous write is done (those that came during it go
# together in the next), rather than every INGEST_FLUSH_INTERVAL; the interval then paces only the
# sessions' summaries when no message waits.
INGEST_GROUP_COMMIT = envbool("INGEST_GROUP_COMMIT", "true")
# INGEST_FLUSH_GAP: with group commit, writes start at least this many seconds apart (what comes in
# between joins the next), so that a low rate does not cost a transaction per message.
INGEST_FLUSH_GAP = envfloat("INGEST_FLUSH_GAP", "0.01")
# INGEST_MAX_PENDING: rows waiting for the database before bots are told to
# back off (their messages stay unacknowledged and are resent).
INGEST_MAX_PENDING = envint("INGEST_MAX_PENDING", "50000")
# INGEST_MAX_CONNECTIONS_PER_TOKEN: bot connections one ingest token may hold
# open on one server process; one more is refused (4429).
INGEST_MAX_CONNECTIONS_PER_TOKEN = envint("INGEST_MAX_CONNECTIONS_PER_TOKEN", "1000")
# SESSION_END_GRACE: seconds a bot may be away (disconnected) and come back to
# the same session. When it does not, the session ends at the time it left.
SESSION_END_GRACE = envfloat("SESSION_END_GRACE", "30")
# SESSION_SWEEP_INTERVAL: seconds between each process's heartbeat and sweep,
# which ends sessions whose bot has been away past the grace, including those
# of a server process that died (rtvi_monitor/live/lifecycle.py).
SESSION_SWEEP_INTERVAL = envfloat("SESSION_SWEEP_INTERVAL", "10")
# SESSION_SUMMARY_INTERVAL: seconds between updates of a live session's row
# (counts, latency, transcript search text) and of the live session list.
SESSION_SUMMARY_INTERVAL = envfloat("SESSION_SUMMARY_INTERVAL", "1")
# OVERVIEW_PING_SECONDS: the Overview hears that its organization's sessions changed at most this often (the
# last change always), every open Overview of it at once, so that their fetches share one computation of
# the figures (rtvi_monitor/live/relay.py ChangePings); as often as the page fetches at most.
OVERVIEW_PING_SECONDS = envfloat("OVERVIEW_PING_SECONDS", "2")
# BROWSER_MAX_LAG: events a browser may have unacknowledged before the server
# stops sending and asks it to resync; BROWSER_STALL_TIMEOUT: seconds a
# stopped browser may stay silent before its socket is closed.
BROWSER_MAX_LAG = envint("BROWSER_MAX_LAG", "5000")
# BROWSER_ACCESS_CHECK: seconds between checks that a watching browser may still watch (a member
# removed, demoted to viewer or signed out stops receiving within it; rtvi_monitor/live/consumers.py), that a
# streaming bot's ingest token is still valid (consumers.TokenWatch), and that whoever a long answer is
# streamed to (an export, a recording: a private API key or a member) may still have it
# (dashboard/access/streams.py, which asks dashboard/access/policy.py again).
BROWSER_ACCESS_CHECK = envfloat("BROWSER_ACCESS_CHECK", "30")
BROWSER_STALL_TIMEOUT = envfloat("BROWSER_STALL_TIMEOUT", "30")
# BROWSER_RECENT_EVENTS: events sent with the state when a browser connects.
BROWSER_RECENT_EVENTS = envint("BROWSER_RECENT_EVENTS", "500")

# LIVE_CONTROL_TIMEOUT: seconds the dashboard waits for a bot to answer an operator's action on a live
# call (end, send text) through its bot package's socket (rtvi_monitor/live/control.py).
LIVE_CONTROL_TIMEOUT = envfloat("LIVE_CONTROL_TIMEOUT", "5")

# --- Turn diagnosis (rtvi_monitor/core/diagnosis.py) ------------------------------------
# TURN_BACKCHANNEL_SECONDS: a user's speech over the bot that was not transcribed is a backchannel
# ("mhm") when shorter than this, else a barge-in. TURN_BACKCHANNEL_WORDS: a transcribed one is a
# backchannel when it has at most this many words, every one an acknowledgement (turns.ACKNOWLEDGEMENTS).
TURN_BACKCHANNEL_SECONDS = envfloat("TURN_BACKCHANNEL_SECONDS", "0.8")
TURN_BACKCHANNEL_WORDS = envint("TURN_BACKCHANNEL_WORDS", "3")
# TURN_STATS_MAX_SESSIONS: an agent's turn figures (its page) read the kept figures of at most this many of
# its newest ended calls of the period (rtvi_monitor/sessions/fleet.py; each call's are kept when it ends,
# rtvi_monitor/sessions/figures.py); TURN_STATS_CACHE_SECONDS: how long those figures are reused.
TURN_STATS_MAX_SESSIONS = envint("TURN_STATS_MAX_SESSIONS", "500")
TURN_STATS_CACHE_SECONDS = envfloat("TURN_STATS_CACHE_SECONDS", "60")

# --- Alerts (rtvi_monitor/alerts/rules.py) -------------------------------------------
# ALERT_EVALUATE_INTERVAL: seconds between evaluations of every alert rule, by
# whichever server process holds the "alerts" lease in the database (one at a
# time, so each alert fires and is delivered once however many processes run).
ALERT_EVALUATE_INTERVAL = envfloat("ALERT_EVALUATE_INTERVAL", "5")
# RETENTION_INTERVAL: seconds between retention purges (rtvi_monitor/privacy/retention.py; one process at a
# time); RETENTION_BATCH: rows of each kind one round deletes; RETENTION_PAUSE: seconds between rounds.
RETENTION_INTERVAL = envfloat("RETENTION_INTERVAL", "60")
RETENTION_BATCH = envint("RETENTION_BATCH", "5000")
RETENTION_PAUSE = envfloat("RETENTION_PAUSE", "0.2")
# ALERT_DELIVERY_ATTEMPTS: tries of one webhook or e-mail before it is marked
# failed; the wait doubles from ALERT_RETRY_BASE seconds (capped at an hour).
ALERT_DELIVERY_ATTEMPTS = envint("ALERT_DELIVERY_ATTEMPTS", "6")
ALERT_RETRY_BASE = envfloat("ALERT_RETRY_BASE", "30")
ALERT_WEBHOOK_TIMEOUT = envfloat("ALERT_WEBHOOK_TIMEOUT", "5")
# ALERT_WEBHOOK_ALLOW_PRIVATE: let webhooks go to loopback and private addresses
# (a receiver inside your network). Off: a rule's author cannot reach the
# dashboard's own network (Redis, PostgreSQL, metadata services) through one.
ALERT_WEBHOOK_ALLOW_PRIVATE = envbool("ALERT_WEBHOOK_ALLOW_PRIVATE", "false")
# Where PagerDuty and Opsgenie channels send (fixed hosts, not a rule author's choice); set them
# for the EU services (https://events.eu.pagerduty.com/v2/enqueue, https://api.eu.opsgenie.com).
ALERT_PAGERDUTY_URL = os.getenv("ALERT_PAGERDUTY_URL", "https://events.pagerduty.com/v2/enqueue")
ALERT_OPSGENIE_URL = os.getenv("ALERT_OPSGENIE_URL", "https://api.opsgenie.com").rstrip("/")
# DASHBOARD_URL: this dashboard's public address, for links in alerts
# (e.g. https://rtvi.example.com); blank sends paths only.
DASHBOARD_URL = os.getenv("DASHBOARD_URL", "").rstrip("/")
# E-mail: Django's backend. EMAIL_URL-style settings are Django's own names.
EMAIL_BACKEND = os.getenv("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.getenv("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", "25")
EMAIL_HOST_USER = os.getenv("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.getenv("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", "false")
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", "10")
DEFAULT_FROM_EMAIL = os.getenv("DEFAULT_FROM_EMAIL", "rtvi-dashboard@localhost")

# OTLP_MAX_BYTES: the largest body POST /v1/traces takes (after gunzip too); over it: 413.
OTLP_MAX_BYTES = envint("OTLP_MAX_BYTES", str(2 * 1024 * 1024))  # under Django's DATA_UPLOAD_MAX_MEMORY_SIZE

# --- Single sign-on: OpenID Connect (dashboard/access/oidc.py; README "Single sign-on") -------------
# Off unless OIDC_RP_CLIENT_ID is set; then the rest of this block applies, and nothing else in
# this file changes. The provider's client for this dashboard has the redirect URI
# <dashboard>/oidc/callback/ and authenticates with its secret (client_secret_basic, or _post
# with OIDC_TOKEN_USE_BASIC_AUTH=false). Password logins keep working beside it.
if os.getenv("OIDC_RP_CLIENT_ID", ""):
    OIDC_RP_CLIENT_ID = os.environ["OIDC_RP_CLIENT_ID"]
    OIDC_RP_CLIENT_SECRET = os.getenv("OIDC_RP_CLIENT_SECRET", "")
    # OIDC_ISSUER: the provider's issuer (e.g. https://login.example.com/realms/ops). The ID token's
    # `iss` must be it; the endpoints not set below are read from its discovery document when single
    # sign-on first needs one (dashboard/net/openid.py: once per process, its issuer checked; a provider
    # that is down fails that sign-in, not the process's start). Set all four never to ask it.
    OIDC_ISSUER = os.getenv("OIDC_ISSUER", "")
    # OIDC_OP_AUTHORIZATION_ENDPOINT, OIDC_OP_TOKEN_ENDPOINT, OIDC_OP_USER_ENDPOINT, OIDC_OP_JWKS_ENDPOINT
    _OIDC_ENDPOINTS = {
        "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
        "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
        "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
        "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
    }
    _oidc = {name: os.getenv(name, "") for name in _OIDC_ENDPOINTS}
    if _missing := [name for name, value in _oidc.items() if not value and not OIDC_ISSUER]:
        raise ImproperlyConfigured(f"OIDC_RP_CLIENT_ID is set: set OIDC_ISSUER, or {', '.join(_missing)}")

    def _discovered(key: str, setting: str) -> str:
        from django.conf import settings

        from dashboard.net import openid

        return openid.endpoint(settings.OIDC_ISSUER, key, setting, settings.OIDC_TIMEOUT)

    from django.utils.functional import lazy

    _oidc = {name: _oidc[name] or lazy(_discovered, str)(key, name) for name, key in _OIDC_ENDPOINTS.items()}
    OIDC_OP_AUTHORIZATION_ENDPOINT = _oidc["OIDC_OP_AUTHORIZATION_ENDPOINT"]
    OIDC_OP_TOKEN_ENDPOINT = _oidc["OIDC_OP_TOKEN_ENDPOINT"]
    OIDC_OP_USER_ENDPOINT = _oidc["OIDC_OP_USER_ENDPOINT"]
    OIDC_OP_JWKS_ENDPOINT = _oidc["OIDC_OP_JWKS_ENDPOINT"]
    # OIDC_RP_SIGN_ALGO: how the provider signs ID tokens (RS256, checked against its JWKS).
    OIDC_RP_SIGN_ALGO = os.getenv("OIDC_RP_SIGN_ALGO", "RS256")
    # OIDC_RP_SCOPES: asked of the provider; add the scope that releases the organization and role
    # claims if the provider needs one (e.g. "openid email profile dashboard").
    OIDC_RP_SCOPES = os.getenv("OIDC_RP_SCOPES", "openid email profile")
    OIDC_TOKEN_USE_BASIC_AUTH = envbool("OIDC_TOKEN_USE_BASIC_AUTH", "true")
    # OIDC_TIMEOUT: seconds for each call to the provider (token, userinfo, keys).
    OIDC_TIMEOUT = envfloat("OIDC_TIMEOUT", "10")
    # OIDC_PROVIDER_NAME: the login page's button says "Sign in with <it>".
    OIDC_PROVIDER_NAME = os.getenv("OIDC_PROVIDER_NAME", "single sign-on")
    # OIDC_ORGANIZATION_CLAIM: the claim naming the user's organizations (a name or a list; names
    # this dashboard does not know are ignored, and a user left with none is refused).
    # OIDC_ROLE_CLAIM: the claim with their role there (viewer, operator, admin); absent or none of
    # those: OIDC_DEFAULT_ROLE.
    OIDC_ORGANIZATION_CLAIM = os.getenv("OIDC_ORGANIZATION_CLAIM", "org")
    OIDC_ROLE_CLAIM = os.getenv("OIDC_ROLE_CLAIM", "role")
    OIDC_DEFAULT_ROLE = os.getenv("OIDC_DEFAULT_ROLE", "viewer").strip().lower()
    if OIDC_DEFAULT_ROLE not in ("viewer", "operator", "admin"):
        raise ImproperlyConfigured("OIDC_DEFAULT_ROLE must be viewer, operator or admin")
    OIDC_USE_PKCE = True
    OIDC_CALLBACK_CLASS = "dashboard.access.oidc.CallbackView"  # a refusal says why on the login page
    LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"
    INSTALLED_APPS.append("mozilla_django_oidc")
    AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend", "dashboard.access.oidc.OrganizationBackend"]
    TEMPLATES[0]["OPTIONS"]["context_processors"].append("dashboard.access.oidc.sso_context")
# --- end of single sign-on ---------------------------------------------------------------------
