"""The course GPU runner: students' submissions graded on the TA's GPUs before the deadline.

    python -m classroom serve --roster ROSTER.csv --data DIR --port PORT     (make serve)
    python -m classroom tokens --data DIR list | revoke ID | reissue ID
    make submit SERVER=URL TOKEN=T        (the student's side: tools/submit.py, in the bundle)

    serve.py      the command line: roster -> tokens, settings, the web server and the workers
    app.py        the HTTP interface (FastAPI): upload, a job's state and report, the status
    upload.py     what is read of an upload: a bounded zip, members taken by exact name, as bytes
    store.py      SQLite in DIR (WAL): students (token hashes), jobs, files, reports, workers, leases
    scheduler.py  the queue's places and ETAs; the leaderboard
    dispatch.py   one worker process per slot (GPU, CPU slot, cluster job), restarted when it dies
    worker.py     a worker: lease a job, grade it with `python -m grader grade --tests visible`
                  under the process supervisor (or as a submitit cluster job), store the report
    page.py       the status page, GET /

docs/runner.md: deployment (HTTPS, systemd, backups) and how it behaves.
"""
