// The check of a task scheduler's state read back from the journal, before it serves: that every
// id names what it should and the tables agree with one another, as any scheduler leaves them.
// A pure function of the tables (no lock of its own: the scheduler holds its lock around it).
#pragma once

#include "absl/status/status.h"
#include "runtime/scheduler/function_table.h"
#include "runtime/scheduler/member_table.h"
#include "runtime/scheduler/object_table.h"
#include "runtime/scheduler/operation_table.h"
#include "runtime/scheduler/transfer_table.h"

namespace cohort::runtime {

// DATA_LOSS, naming the first inconsistency found (an id that names nothing, an alias cycle, a
// running task without its worker ...); OK when there is none.
absl::Status CheckRestored(const MemberTable& members, const FunctionTable& functions,
                           const ObjectTable& objects, const OperationTable& operations,
                           const TransferTable& transfers);

}  // namespace cohort::runtime
