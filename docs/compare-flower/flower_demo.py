"""A throwaway Celery app for docs/operations.md, "Compared with Flower": its
tasks give Flower's task list one row of each kind (succeeded, failed with a
traceback, running with args and kwargs, retried then succeeded, retried until
it failed). Its broker and result backend are a Redis on 127.0.0.1:6390."""

import time

from celery import Celery

app = Celery("flower_demo", broker="redis://127.0.0.1:6390/0", backend="redis://127.0.0.1:6390/1")
app.conf.update(
    worker_send_task_events=True,  # as `celery worker -E`
    task_send_sent_event=True,  # a task is listed as soon as it is sent
    task_track_started=True,
    result_extended=True,
)


@app.task
def add(x, y):
    return x + y


@app.task
def send_invoice(order_id, *, currency="EUR", email=None):
    time.sleep(0.5)
    return {"order_id": order_id, "currency": currency, "sent_to": email}


def _parse_line(line):
    amount = line.split(";")[2]
    return float(amount)


@app.task
def import_report(path):
    return [_parse_line(line) for line in ["a;b;1.5", "c;d;oops"]]


@app.task
def resize_images(batch_id, sizes, *, quality=85, keep_exif=False):
    time.sleep(600)  # long enough to be caught running in a screenshot
    return {"batch_id": batch_id, "resized": 3 * len(sizes)}


@app.task(bind=True, max_retries=3, default_retry_delay=1)
def fetch_rates(self, base, *, flaky_times=2):
    if self.request.retries < flaky_times:
        tried = self.request.retries + 1
        raise self.retry(exc=ConnectionError(f"rates service refused {base} (try {tried})"))
    return {"base": base, "USD": 1.08, "tries": self.request.retries + 1}
