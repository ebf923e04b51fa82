from __future__ import annotations

from django.contrib import admin

from demo_site.models import LogEntry


@admin.register(LogEntry)
class LogEntryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  (not subscriptable at run time)
    list_display = ["created_at", "level", "message"]
    list_filter = ["level"]
    date_hierarchy = "created_at"
