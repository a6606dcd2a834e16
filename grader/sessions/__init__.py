"""Interview sessions: an embedded SQLite store (``store``, ``migrations``), the candidate's
workspaces (``workspace``), graded attempts (``attempts``, ``series``; the model and the
store's code are ``grader.attempts``, shared with practice), the interviewer's live view
(``live``), score sheets and the feedback round (``scoresheet``) and calibration between
interviewers (``calibration``), and what sessions, reports and bundles print (``console``)."""
