"""The pipeline's tables: one typed function per named query of ``schema/queries/<group>.sql``;
asyncpg records stay here."""
