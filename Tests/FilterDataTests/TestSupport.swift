// Shared helpers for the FilterData tests.
