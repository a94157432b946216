# tests of the computational storage device (plain SSD, emulator, HLS kernel, profiles)
hill_add_test(test_csd unit LIBS hill_engine SOURCES test_csd.cpp)
hill_add_test(test_csd_data model LIBS hill_engine SOURCES test_csd_data.cpp)
