"""A small OAuth2 identity provider for Concierge's integration tests: django-oauth-toolkit
with the password and refresh-token grants, refresh-token rotation, short access tokens,
RFC 7009 revocation, a protected JSON resource answering RFC 6750 401s, and a stats view.

    python provider.py PORT DB_PATH [ACCESS_TOKEN_SECONDS [REFRESH_GRACE_SECONDS]]

REFRESH_GRACE_SECONDS is django-oauth-toolkit's REFRESH_TOKEN_GRACE_PERIOD_SECONDS (default 0:
a rotated refresh token is refused at once, as the toolkit's default does).

Creates the database, two users (alice / wonderland-pass, bob / looking-glass-pass) and a confidential client
(concierge-client / concierge-secret), prints "ready PORT" and serves on 127.0.0.1:PORT
(PORT 0: a free port the system chooses) until killed. Test traffic stays on loopback.
"""
import json
import sys

import django
from django.conf import settings

PORT = int(sys.argv[1])
DB_PATH = sys.argv[2]
ACCESS_SECONDS = int(sys.argv[3]) if len(sys.argv) > 3 else 300
GRACE_SECONDS = int(sys.argv[4]) if len(sys.argv) > 4 else 0

settings.configure(
    DEBUG=False,
    SECRET_KEY="concierge-test-provider-not-secret",
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "oauth2_provider"],
    MIDDLEWARE=[],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DB_PATH, "OPTIONS": {"timeout": 20}}},
    DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    USE_TZ=True,
    OAUTH2_PROVIDER={
        "ACCESS_TOKEN_EXPIRE_SECONDS": ACCESS_SECONDS,
        "ROTATE_REFRESH_TOKEN": True,
        "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": GRACE_SECONDS,
        "PKCE_REQUIRED": False,
    },
    PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
)
django.setup()

from django.core.management import call_command  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.urls import include, path  # noqa: E402
from django.utils import timezone  # noqa: E402
from oauth2_provider.models import AccessToken, RefreshToken  # noqa: E402
from oauth2_provider.oauth2_backends import get_oauthlib_core  # noqa: E402

# Switches a test flips through /test/fault: how the token endpoint answers refresh grants.
FAULT = {"mode": None}
# Revocation requests received (RFC 7009), whatever their outcome; refresh grants asked for, and
# those refused with invalid_grant (the /test/stats counts).
COUNTS = {"revoke_calls": 0, "refresh_requests": 0, "refresh_refused": 0}
# Seconds a refresh grant's reply is held back after the provider has rotated the refresh token
# (/test/slow): the window in which a client that dies loses the new token.
SLOW = {"seconds": 0.0}


def me(request):
    """A protected JSON resource: RFC 6750's 401 with WWW-Authenticate for a bad token."""
    valid, oauth_request = get_oauthlib_core().verify_request(request, scopes=[])
    if not valid:
        response = JsonResponse({"error": "invalid_token"}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="test", error="invalid_token"'
        return response
    return JsonResponse({"user": oauth_request.user.username, "time": timezone.now().isoformat()})


def stats(request):
    now = timezone.now()
    from django.contrib.auth.models import User
    by_user = {
        user.username: {
            "refresh_grants": RefreshToken.objects.filter(user=user, revoked__isnull=False).count(),
            "live_refresh_tokens": RefreshToken.objects.filter(user=user, revoked__isnull=True).count(),
        }
        for user in User.objects.all()
    }
    return JsonResponse({
        "by_user": by_user,
        "refresh_grants": RefreshToken.objects.filter(revoked__isnull=False).count(),
        "live_refresh_tokens": RefreshToken.objects.filter(revoked__isnull=True).count(),
        "access_tokens": AccessToken.objects.count(),
        "live_access_tokens": AccessToken.objects.filter(expires__gt=now).count(),
        "revoke_calls": COUNTS["revoke_calls"],
        "refresh_requests": COUNTS["refresh_requests"],
        "refresh_refused": COUNTS["refresh_refused"],
    })


def expire(request):
    """Every access token issued so far expires now (the next use is a 401)."""
    AccessToken.objects.update(expires=timezone.now() - timezone.timedelta(seconds=1))
    return JsonResponse({"expired": True})


def slow(request):
    SLOW["seconds"] = float(request.GET.get("seconds") or 0)
    return JsonResponse({"seconds": SLOW["seconds"]})


def fault(request):
    FAULT["mode"] = request.GET.get("mode") or None
    return JsonResponse({"mode": FAULT["mode"]})


from oauth2_provider import views as oauth_views  # noqa: E402


class Token(oauth_views.TokenView):
    def post(self, request, *args, **kwargs):
        if request.POST.get("grant_type") == "refresh_token":
            if FAULT["mode"] == "429":
                response = JsonResponse({"error": "temporarily_unavailable"}, status=429)
                response["Retry-After"] = "7"
                return response
            if FAULT["mode"] == "503":
                return JsonResponse({"error": "server_error"}, status=503)
            if FAULT["mode"] == "invalid_grant":
                return JsonResponse({"error": "invalid_grant"}, status=400)
            COUNTS["refresh_requests"] += 1
            response = super().post(request, *args, **kwargs)
            if response.status_code == 400 and b"invalid_grant" in response.content:
                COUNTS["refresh_refused"] += 1
            elif response.status_code == 200:
                response["X-Test-Hold-Seconds"] = str(SLOW["seconds"])
            return response
        return super().post(request, *args, **kwargs)


class Revoke(oauth_views.RevokeTokenView):
    def post(self, request, *args, **kwargs):
        COUNTS["revoke_calls"] += 1
        return super().post(request, *args, **kwargs)


urlpatterns = [
    path("o/token/", Token.as_view()),
    path("o/revoke_token/", Revoke.as_view()),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("api/me", me),
    path("test/stats", stats),
    path("test/fault", fault),
    path("test/slow", slow),
    path("test/expire", expire),
]


def setup():
    from django.contrib.auth.models import User
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0, interactive=False)
    if User.objects.filter(username="alice").exists():
        return  # a restart on the same database
    User.objects.create_user("alice", password="wonderland-pass")
    User.objects.create_user("bob", password="looking-glass-pass")
    Application.objects.create(
        name="concierge", client_id="concierge-client", client_secret="concierge-secret", hash_client_secret=True,
        client_type=Application.CLIENT_CONFIDENTIAL, authorization_grant_type=Application.GRANT_PASSWORD,
    )


if __name__ == "__main__":
    setup()
    import threading
    import time
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
    from django.core.wsgi import get_wsgi_application

    # One request at a time in Django: SQLite answers concurrent writers with "database is
    # locked" (a 500 from the provider), which would make the tests flaky, not the provider
    # realistic. Only a refresh reply held back by /test/slow waits outside that lock (its
    # token already rotated and committed), so other requests go on meanwhile.
    class Server(ThreadingMixIn, WSGIServer):
        request_queue_size = 256
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

        def handle(self):
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client died while its reply was held back: as a provider sees it

    django_app = get_wsgi_application()
    one_at_a_time = threading.Lock()

    def app(environ, start_response):
        with one_at_a_time:
            captured = {}

            def capture(status, headers, exc_info=None):
                captured["status"], captured["headers"] = status, headers

            body = b"".join(django_app(environ, capture))
        headers = [(k, v) for k, v in captured["headers"] if k != "X-Test-Hold-Seconds"]
        hold = next((float(v) for k, v in captured["headers"] if k == "X-Test-Hold-Seconds"), 0.0)
        if hold > 0:
            time.sleep(hold)
        start_response(captured["status"], headers)
        return [body]

    server = make_server("127.0.0.1", PORT, app, server_class=Server, handler_class=Quiet)
    print("ready %d" % server.server_port, flush=True)
    server.serve_forever()
