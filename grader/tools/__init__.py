"""The interviewer's and the candidate's tools beside grading: the capacity calculator (``calc``,
over quantities with units, ``units``) and the quantitative questions (``quiz``). Pure Python: no
torch, no grading modules."""
