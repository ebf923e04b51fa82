"""Sends flower_demo's tasks: the rows of Flower's task list."""

from flower_demo import add, fetch_rates, import_report, resize_images, send_invoice

for x in range(4):
    add.delay(x, 10 * x)
send_invoice.delay(1042, currency="USD", email="billing@example.com")
send_invoice.delay(1043, email="ops@example.com")
import_report.delay("/srv/reports/2026-12.csv")
fetch_rates.delay("EUR")  # fails twice, then succeeds on its third try
fetch_rates.delay("GBP", flaky_times=5)  # fails every try: its retries run out
resize_images.delay(77, [320, 640, 1280], quality=90, keep_exif=True)
