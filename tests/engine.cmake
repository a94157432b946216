# tests of engine
