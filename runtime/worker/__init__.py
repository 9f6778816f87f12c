"""One stage worker process, one role per module: producer, executor, settler, completer,
heartbeat, listener, rescuer, watchers."""
