"""The exercise kit: a custom Function's backward as a student's exercise, graded.

`autograd-demos exercise NAME --output-dir DIR` writes exercise.py (forward given, backward to
write) and grading.yaml (the teacher's: points, hints, hidden seeds and shapes), for each of the
documents' Functions (table.py) and for the Functions a config names (custom_function entries);
`autograd-demos grade FILE` grades a submission on the hidden inputs against the reference's
autograd, with hints from the lab's diagnosis (demos.lab.checks.diagnose) and Gradescope's
results.json. See demos/docs/exercises.md.
"""
