"""The batch's round trip with the platforms TAs use (trusted side, no student code).

    intake.py     a batch's submissions: layout given, remembered or detected; roster kept
    layouts.py    where the submissions are: a plain folder, a Gradescope export,
                  a Canvas or a Moodle download; each becomes a list of Entry
    roster.py     an optional roster CSV: names, emails and SIDs by id
    gradebook.py  class.csv -> Gradescope's or Canvas's upload CSV; the merge of
                  Gradescope's correctness scores with a GPU batch's performance
    csvio.py      bounded CSV reading, safe cells, atomic group-readable writes
"""
