"""The maintenance leader and the periodic work only the leader does.

One process per database wins the election (``leader``) and then runs
rotation, prune, rescue, cron and the other tasks (``maintenance``,
``maintenance_tasks``) plus the promoter of due jobs (``promoter``).  It
touches no running attempt, so it is independent of ``attempts``.
"""
