"""A published output's life: its file names (layout), manifest and verify, what is ours
(ownership), which job it holds (origin), accounting, finalize, locks, the local and gs://
publish and the output guard, and the one OutputPlace (place) a path becomes, local or gs://.
Imports the layers below it (base, storage, formats, contract, shuffle) only.
"""
