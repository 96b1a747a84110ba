# C declarations for the compiled twin of cleaner_core.py (Cython reads this file by the
# extension's name when setup.py compiles cleaner_core.py; the interpreter never sees it).

# The signature of OpenSSL's one-shot MD5(data, length, out): see cleaner_core._md5_function.
ctypedef unsigned char* (*md5_fn)(const unsigned char*, size_t, unsigned char*)

# A hint to the CPU to start loading a map slot while other records are hashed (GCC and Clang;
# elsewhere nothing).
cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define triolog_prefetch(address) __builtin_prefetch(address, 1, 0)
    #else
    #define triolog_prefetch(address) ((void)(address))
    #endif
    """
    void triolog_prefetch(const void* address)
