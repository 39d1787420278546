"""`rtrl chaos`: fault injection on the whole loop, and the audit that every served request got exactly one
reward. Modules: `plan` (the seeded fault schedule), `control` (kill and restart processes),
`floods` and `kafka_io` (hostile replays to Kafka), `users` (the recorded simulated clients), `loop` (the loop
under test, in a private state dir), `audit` (lost / duplicated / pending), `runner` (all of it in order)."""
