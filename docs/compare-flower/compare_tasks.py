"""flower_demo's tasks as Django Tasks on LeaseBackend, for the same rows in
the admin's *Django tasks*. resize_images reports its progress, which a
lease can carry; the rest are the Celery tasks' bodies."""

import time

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

from django_bgtasks.backend import task_lease


@task()
def add(x, y):
    return x + y


@task(queue_name="emails")
def send_invoice(order_id, *, currency="EUR", email=None):
    time.sleep(0.5)
    return {"order_id": order_id, "currency": currency, "sent_to": email}


def _parse_line(line):
    amount = line.split(";")[2]
    return float(amount)


@task()
def import_report(path):
    return [_parse_line(line) for line in ["a;b;1.5", "c;d;oops"]]


@task()
def resize_images(batch_id, sizes, *, quality=85, keep_exif=False):
    lease = task_lease()
    total = 3 * len(sizes) * 100
    for done in range(total):
        lease.update({"phase": "resizing", "done": done, "total": total, "batch": batch_id})
        time.sleep(1)  # long enough to be caught running in a screenshot
    return {"batch_id": batch_id, "resized": total}


@task(backend="retrying", takes_context=True)
def fetch_rates(context, base, *, flaky_times=2):
    if context.attempt <= flaky_times:
        raise ConnectionError(f"rates service refused {base} (try {context.attempt})")
    return {"base": base, "USD": 1.08, "tries": context.attempt}
