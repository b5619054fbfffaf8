// The part of the Valkey (and Redis) module ABI that neardup's server module uses, declared here
// rather than vendoring the server's 120 KB header. A module finds every API function by name at
// load time: the server puts its GetApi function first in each context it passes, and each name is
// registered as both "ValkeyModule_<name>" and "RedisModule_<name>" (Redis registers the latter),
// so the same .so loads into either server. The constants below are part of that stable ABI.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {
struct VmCtx;
struct VmString;
struct VmKey;
struct VmScanCursor;
struct VmCallReply;
}

namespace neardup::vm {

constexpr int kOk = 0;
constexpr int kErr = 1;
constexpr int kApiVersion1 = 1;
constexpr int kRead = 1 << 0;
constexpr int kWrite = 1 << 1;
constexpr int kKeyTypeEmpty = 0;
constexpr int kKeyTypeString = 1;
constexpr int kKeyTypeHash = 3;
constexpr int kHashNone = 0;
constexpr int kHashNx = 1 << 0;        // HashSet: only fields that do not exist yet
constexpr int kHashCFields = 1 << 2;   // HashGet/HashSet: fields as C strings (no module string each)
constexpr int kHashCountAll = 1 << 4;  // HashSet: count inserted fields too
constexpr int kCtxFlagsCluster = 1 << 5;  // GetContextFlags: the server runs in cluster mode
constexpr int kReplyError = 1;            // CallReplyType of an error reply
constexpr int kReplyArray = 3;            // CallReplyType of an array reply
// HashSet's value that deletes the field.
inline VmString* const kHashDelete = reinterpret_cast<VmString*>(1);

// A server event (RedisModuleEvent): its id and the version of the data its callback gets.
struct VmEvent {
  uint64_t id;
  uint64_t dataver;
};
constexpr uint64_t kEventForkChild = 13;
constexpr uint64_t kForkChildBorn = 0;
constexpr uint64_t kForkChildDied = 1;

using CommandFn = int (*)(VmCtx*, VmString**, int);
using EventFn = void (*)(VmCtx*, VmEvent, uint64_t subevent, void* data);
using TimerFn = void (*)(VmCtx*, void* data);
using ScanKeyFn = void (*)(VmKey*, VmString* field, VmString* value, void* data);

struct Api {
  void (*SetModuleAttribs)(VmCtx*, const char*, int, int);
  int (*CreateCommand)(VmCtx*, const char*, CommandFn, const char*, int, int, int);
  VmKey* (*OpenKey)(VmCtx*, VmString*, int);
  void (*CloseKey)(VmKey*);
  int (*KeyType)(VmKey*);
  int (*HashGet)(VmKey*, int, ...);
  int (*HashSet)(VmKey*, int, ...);
  int (*StringSet)(VmKey*, VmString*);
  char* (*StringDMA)(VmKey*, size_t*, int);
  int (*StringTruncate)(VmKey*, size_t);
  int (*DeleteKey)(VmKey*);
  VmScanCursor* (*ScanCursorCreate)();
  void (*ScanCursorDestroy)(VmScanCursor*);
  int (*ScanKey)(VmKey*, VmScanCursor*, ScanKeyFn, void*);
  VmString* (*CreateString)(VmCtx*, const char*, size_t);
  void (*FreeString)(VmCtx*, VmString*);
  const char* (*StringPtrLen)(const VmString*, size_t*);
  int (*StringToLongLong)(const VmString*, long long*);
  int (*ReplyWithArray)(VmCtx*, long);
  int (*ReplyWithLongLong)(VmCtx*, long long);
  int (*ReplyWithStringBuffer)(VmCtx*, const char*, size_t);
  int (*ReplyWithError)(VmCtx*, const char*);
  int (*WrongArity)(VmCtx*);
  int (*ReplicateVerbatim)(VmCtx*);
  int (*SubscribeToServerEvent)(VmCtx*, VmEvent, EventFn);
  uint64_t (*CreateTimer)(VmCtx*, long long, TimerFn, void*);
  void (*Log)(VmCtx*, const char*, const char*, ...);
  int (*GetContextFlags)(VmCtx*);
  int (*MustObeyClient)(VmCtx*);
  VmCallReply* (*Call)(VmCtx*, const char*, const char*, ...);
  int (*CallReplyType)(VmCallReply*);
  const char* (*CallReplyStringPtr)(VmCallReply*, size_t*);
  void (*FreeCallReply)(VmCallReply*);
  unsigned int (*ClusterKeySlot)(VmString*);
  size_t (*CallReplyLength)(VmCallReply*);
  VmCallReply* (*CallReplyArrayElement)(VmCallReply*, size_t);
  long long (*CallReplyInteger)(VmCallReply*);
  const char* (*GetMyClusterID)();
};

// Filled by init(); the server is single-threaded for commands, so one global table is enough.
inline Api api{};

// Resolve every function (by its RedisModule_ name, which Valkey and Redis both register) and name
// the module. Returns kErr if the server lacks any of them.
inline int init(VmCtx* ctx, const char* name, int version) {
  using GetApiFn = int (*)(const char*, void*);
  const auto get_api = reinterpret_cast<GetApiFn>(reinterpret_cast<void**>(ctx)[0]);
  bool ok = true;
  const auto get = [&](const char* fn, auto& slot) {
    ok = ok && get_api(fn, reinterpret_cast<void*>(&slot)) == kOk;
  };
  get("RedisModule_SetModuleAttribs", api.SetModuleAttribs);
  get("RedisModule_CreateCommand", api.CreateCommand);
  get("RedisModule_OpenKey", api.OpenKey);
  get("RedisModule_CloseKey", api.CloseKey);
  get("RedisModule_KeyType", api.KeyType);
  get("RedisModule_HashGet", api.HashGet);
  get("RedisModule_HashSet", api.HashSet);
  get("RedisModule_StringSet", api.StringSet);
  get("RedisModule_StringDMA", api.StringDMA);
  get("RedisModule_StringTruncate", api.StringTruncate);
  get("RedisModule_DeleteKey", api.DeleteKey);
  get("RedisModule_ScanCursorCreate", api.ScanCursorCreate);
  get("RedisModule_ScanCursorDestroy", api.ScanCursorDestroy);
  get("RedisModule_ScanKey", api.ScanKey);
  get("RedisModule_CreateString", api.CreateString);
  get("RedisModule_FreeString", api.FreeString);
  get("RedisModule_StringPtrLen", api.StringPtrLen);
  get("RedisModule_StringToLongLong", api.StringToLongLong);
  get("RedisModule_ReplyWithArray", api.ReplyWithArray);
  get("RedisModule_ReplyWithLongLong", api.ReplyWithLongLong);
  get("RedisModule_ReplyWithStringBuffer", api.ReplyWithStringBuffer);
  get("RedisModule_ReplyWithError", api.ReplyWithError);
  get("RedisModule_WrongArity", api.WrongArity);
  get("RedisModule_ReplicateVerbatim", api.ReplicateVerbatim);
  get("RedisModule_SubscribeToServerEvent", api.SubscribeToServerEvent);
  get("RedisModule_CreateTimer", api.CreateTimer);
  get("RedisModule_Log", api.Log);
  get("RedisModule_GetContextFlags", api.GetContextFlags);
  get("RedisModule_Call", api.Call);
  get("RedisModule_CallReplyType", api.CallReplyType);
  get("RedisModule_CallReplyStringPtr", api.CallReplyStringPtr);
  get("RedisModule_FreeCallReply", api.FreeCallReply);
  get("RedisModule_CallReplyLength", api.CallReplyLength);
  get("RedisModule_CallReplyArrayElement", api.CallReplyArrayElement);
  get("RedisModule_CallReplyInteger", api.CallReplyInteger);
  get("RedisModule_GetMyClusterID", api.GetMyClusterID);
  if (!ok) return kErr;
  // Optional (servers before Redis 7.2 lack them): without MustObeyClient, served_here asks the server
  // also for what this node must apply; without ClusterKeySlot, SlotRouting asks about every key.
  const auto optional = [&](const char* fn, auto& slot) {
    if (get_api(fn, reinterpret_cast<void*>(&slot)) != kOk) slot = nullptr;
  };
  optional("RedisModule_MustObeyClient", api.MustObeyClient);
  optional("RedisModule_ClusterKeySlot", api.ClusterKeySlot);
  api.SetModuleAttribs(ctx, name, version, kApiVersion1);
  return kOk;
}

}  // namespace neardup::vm
