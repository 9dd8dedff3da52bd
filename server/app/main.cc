// mha-server: multi-head-attention forward passes over gRPC. See `mha-server --help`.
#include "server/app/server_app.h"

int main(int argc, char** argv) { return mha::serve::ServerMain(argc, argv); }
