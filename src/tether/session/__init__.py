"""Running sessions: one turn under its lease (`run`), steering from any process
(`control`), and the pieces they stand on: the writer's handle on a log (`log`), claiming a
lease (`lease`) and keeping it while the turn runs (`watch`)."""
