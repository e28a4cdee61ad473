//! Shape and type inference for every operator (filled in by the importer work).
