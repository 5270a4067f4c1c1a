// volt_bench --distributed: data-parallel training under `mpirun -np 2`
// (bench/distributed.cpp).  volt_bench hands its arguments over when it sees
// --distributed; the rest of volt_bench is not involved.
#pragma once

namespace bench_dist {

bool wanted(int argc, char** argv);  // --distributed among the arguments
int run(int argc, char** argv);

}  // namespace bench_dist
