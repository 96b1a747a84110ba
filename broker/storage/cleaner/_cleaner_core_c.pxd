# C declarations for the compiled twin of cleaner_core.py (Cython reads this file by the
# extension's name when setup.py compiles cleaner_core.py; the interpreter never sees it).

# The signature of OpenSSL's one-shot MD5(data, length, out): see cleaner_core._md5_function.
ctypedef unsigned char* (*md5_fn)(const unsigned char*, size_t, unsigned char*)
