"""The course GPU runner: students' submissions graded on the TA's GPUs before the deadline.

    python -m classroom serve --roster ROSTER.csv --data DIR --port PORT     (make serve)
    python -m classroom tokens --data DIR list | revoke ID | reissue ID      (make tokens)
    python -m classroom runner --data DIR jobs | requeue | grant | close | open | extend | export
                                          (make runner: the TA's view and levers, admin.py)
    make submit SERVER=URL                (the student's side: tools/submit.py, in the bundle;
                                          the token from ~/.runner-token or TOKEN)

    serve.py      the command line: roster -> tokens, settings, the web server and the workers
    app.py        the HTTP interface (FastAPI): upload, a job's state and report, the status
    upload.py     what is read of an upload: a bounded zip, members taken by exact name, as bytes
    store.py      SQLite in DIR (WAL): students (token hashes), jobs, files, reports, workers, leases
    scheduler.py  the queue's places and ETAs; the leaderboard
    dispatch.py   one worker process per slot (GPU, CPU slot, cluster job), restarted when it dies
    worker.py     a worker: lease a job, grade it with `python -m grader grade --tests visible`
                  under the process supervisor (or as a submitit cluster job), store the report
    page.py       the status page, GET /
    names.py      display names: what one may be, when two are the same
    admin.py      python -m classroom runner: jobs, requeue, grant, deadline, extensions, export

docs/runner.md: deployment (HTTPS, systemd, backups) and how it behaves.
"""
