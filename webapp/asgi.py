import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs settings first
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi = get_asgi_application()

from webapp import heap  # noqa: E402
from webapp.runs.routing import websocket_urlpatterns  # noqa: E402 - imports models

application = ProtocolTypeRouter({
    "http": django_asgi,
    "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
})
heap.settle()  # after everything is imported: full collections then skip startup's objects
