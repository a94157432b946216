# tests of compute
