from django.apps import AppConfig


class DemoSiteConfig(AppConfig):
    name = "demo_site"
    default_auto_field = "django.db.models.BigAutoField"
