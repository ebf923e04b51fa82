"""Enqueues compare_tasks' tasks, as send_celery_tasks.py sends Celery's. Run
inside the site: ``manage.py shell -c "import send_django_tasks"``."""

from compare_tasks import add, fetch_rates, import_report, resize_images, send_invoice

for x in range(4):
    add.enqueue(x, 10 * x)
send_invoice.enqueue(1042, currency="USD", email="billing@example.com")
send_invoice.enqueue(1043, email="ops@example.com")
import_report.enqueue("/srv/reports/2026-12.csv")
fetch_rates.enqueue("EUR")  # fails twice, then succeeds on its third attempt
fetch_rates.enqueue("GBP", flaky_times=5)  # fails every attempt: its attempts run out
resize_images.enqueue(77, [320, 640, 1280], quality=90, keep_exif=True)
