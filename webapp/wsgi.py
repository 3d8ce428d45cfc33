import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
application = get_wsgi_application()

from webapp import heap  # noqa: E402 - needs the apps loaded

heap.settle()  # after everything is imported: full collections then skip startup's objects
