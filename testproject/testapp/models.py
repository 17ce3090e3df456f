"""Side tables the test jobs write to, so tests can see what ran and how often."""

from django.db import models


class Execution(models.Model):
    """One row per handler run (any number per job)."""

    job_id = models.BigIntegerField(db_index=True)
    label = models.CharField(max_length=100)
    attempt = models.IntegerField(default=0)
    run_lease = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.label} of job {self.job_id} (attempt {self.attempt})"


class ExactlyOnce(models.Model):
    """A handler side effect that must happen once per job: a second run fails."""

    job_id = models.BigIntegerField(unique=True)
    value = models.IntegerField()

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.value}"
