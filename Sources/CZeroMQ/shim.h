#ifndef CZEROMQ_SHIM_H
#define CZEROMQ_SHIM_H

#include <zmq.h>
#include <errno.h>

/// errno as libzmq set it, read through a function so Swift sees the thread's value.
static inline int CZeroMQ_errno(void) { return zmq_errno(); }

#endif
